"""The grammar the front ends emit: node types, builder and pruning, Lark/regex text, EBNF input."""
