"""What a grammar cannot say, checked at runtime on the accepted bytes: a byte-level JSON reader and its trackers."""
