"""The model the suite runs wherever the default model is not what is under test."""

#: SmolLM2-135M: the fastest registered chat model (183 tok/s prefill on 2 cores against the
#: default Qwen 0.5B's 91). Tests of the default itself name `registry()[0]`; tests/test_qwen.py
#: runs ingest → ask → chat resume → serve reuse on the default.
TEST_MODEL = "smollm2-135m"
