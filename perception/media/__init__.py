"""Bytes → timestamped frames and audio: decoding, sources, the supervised gateway, voice activity."""
