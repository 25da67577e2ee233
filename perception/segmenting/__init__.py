"""Frames → segments, and how deeply to look at each: scene/motion/speech cuts, key frames, the scheduler gate."""
