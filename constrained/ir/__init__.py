"""The grammar the front ends emit (``ir.builder``): node types, constructors and pruning, Lark/regex text."""
