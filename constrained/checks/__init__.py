"""What a grammar cannot say, checked at runtime on the accepted bytes: the byte-level JSON reader."""
