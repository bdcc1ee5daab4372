"""Chat builds' side of tokenize: a conversation rendered by its template, tokenized, with a loss mask.

``template`` loads and renders chat templates (``load_chat_template``, ``ChatRenderer``, the
spans to train on; ``mask_from_offsets``), in the bounded jinja environment of ``sandbox``,
with the replies' starts found once per conversation shape by ``skeleton``. ``encode`` is the
door a build walks through: ``chat_tokenizer`` once in the main process, ``encode_conversations``
per chunk on any core.
"""

from .encode import Encoded, chat_tokenizer, encode_conversations
from .template import TRAIN_ON, ChatError, ChatRenderer, ChatSpec, load_chat_template, mask_from_offsets

__all__ = ["ChatError", "ChatRenderer", "ChatSpec", "Encoded", "TRAIN_ON", "chat_tokenizer", "encode_conversations",
           "load_chat_template", "mask_from_offsets"]
