"""Inference in the server's own process, with models that Python packages ship: GGUF chat models
through llama.cpp (`llama_cpp_provider`), static embeddings through wordllama (`wordllama_provider`).
Nothing is downloaded at run time; a model loads on first use."""
