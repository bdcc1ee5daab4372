"""The training side's build fixtures, for the datasets view's tests (tests/shards/test_hf_datasets.py)."""

from tests.train.conftest import chat_build, datasets_cache, short_docs_build  # noqa: F401
