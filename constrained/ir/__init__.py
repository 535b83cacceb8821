"""The grammar the front ends emit: its node types, its builder and pruning, its Lark/regex text, and EBNF input."""
