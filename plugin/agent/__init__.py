"""The QA agent: a tool-calling loop over the memory tools on an OpenAI-compatible model."""
