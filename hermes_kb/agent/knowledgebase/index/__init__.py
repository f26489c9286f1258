"""The index: where a directory's chunks, terms and vectors are kept, and the copies searches read."""
