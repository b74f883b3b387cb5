"""What the decoder does for a CPU: the output head's kernel chosen by timing (:mod:`.head`), the allocator setting that
keeps freed memory in the heap (:mod:`.memory`), and the small per-machine files that keep what was measured once
(:mod:`.measured`: the head's kernel choices, ``-k auto``'s step costs)."""
