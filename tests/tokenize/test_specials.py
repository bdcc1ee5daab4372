"""specials.found_in: the documents whose text holds a special token's string, encoded as its id."""

import numpy as np
import pytest

from packer.tokenize.specials import found_in

BOS, EOS, MASK, SEP = 1, 2, 3, 4


def flat(docs: list[list[int]], pre: tuple, post: tuple) -> tuple[np.ndarray, np.ndarray]:
    ids = [i for d in docs for i in (*pre, *d, *post)]
    return np.array(ids, np.uint32), np.array([len(d) + len(pre) + len(post) for d in docs], np.int64)


@pytest.mark.parametrize("specials", [{BOS: "<s>", EOS: "</s>", MASK: "<mask>"},  # a few: compared with ==
                                      {i: f"<{i}>" for i in (BOS, EOS, MASK, SEP, 90, 91)}])  # more: np.isin
@pytest.mark.parametrize("pre, post", [((), (EOS,)), ((BOS,), (EOS,)), ((BOS,), ()), ((), ())])
def test_found_where_a_special_id_is_inside_a_text_whose_string_holds_it(specials, pre, post):
    s = specials
    texts = ["plain", f"x {s[MASK]} y", "plain again", f"{s[EOS]} and {s[BOS]}", "id but no string"]
    docs = [[10, 11], [10, MASK, 11], [12], [EOS, 10, BOS], [MASK, 13]]
    ids, lengths = flat(docs, pre, post)
    assert found_in(texts, ids, lengths, pre, post, specials) == [(1, s[MASK]), (3, s[EOS]), (3, s[BOS])]
    # none inside any text: the ids around the texts alone are never reported
    clean = [[10, 11], [12], [13, 14, 15]]
    ids, lengths = flat(clean, pre, post)
    assert found_in(["a", "b", "c"], ids, lengths, pre, post, specials) == []


def test_a_text_made_of_specials_only_is_found_once_per_token():
    ids, lengths = flat([[EOS] * 50], (), (EOS,))
    assert found_in(["</s>" * 50], ids, lengths, (), (EOS,), {EOS: "</s>"}) == [(0, "</s>")]
