"""The read path: query profile → rule routing → one candidate pool → compact memory block."""
