"""Facts → text: the local describer, the VLM client and stage, anchoring, context layers, steering."""
