"""Sentence embeddings for semantic recall: a BERT-family model converted to GGUF at pull time."""
