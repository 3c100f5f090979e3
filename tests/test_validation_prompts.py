"""validation/prompts.py: which prompts are measured and which predict."""

import json

from validation.prompts import pick_round_robin


def test_round_robin_spans_the_categories():
    gens = [{"prompt_id": str(i), "category": c} for i, c in enumerate("aaabbbccc")]
    assert [g["category"] for g in pick_round_robin(gens, 4)] == ["a", "b", "c", "a"]
    assert pick_round_robin(gens, 0) == gens and len(pick_round_robin(gens, 50)) == 9


def test_unseen_leaves_out_the_profiled_prompts_and_the_heads_training_prompts(tmp_path):
    import pandas as pd

    from runtime.heads.store import FORMAT, FORMAT_VERSION, HEADS_FILE
    from validation.prompts import unseen_exclusions

    class Profiled:  # what unseen_exclusions reads of a profile
        has_acceptance = True
        acceptance = pd.DataFrame({"prompt_id": ["a", "b", "b"]})

        @staticmethod
        def generations():
            return [{"prompt_id": "a", "prompt": "text of a"}, {"prompt_id": "g", "prompt": "text of g"}]

    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / HEADS_FILE).write_text(json.dumps({"model_id": "tiny-llama", "num_layers": 6, "hidden_size": 64,
                                                "vocab_size": 320, "kind": "linear", "exits": [2],
                                                "format": FORMAT, "format_version": FORMAT_VERSION,
                                                "training": {"train_prompt_ids": ["t1", 7]}}))
    seen, trained = unseen_exclusions(Profiled, str(heads))
    assert seen == {"a", "b", "g", "text of a", "text of g"}  # traced ids, generated ids, their texts
    assert trained == {"t1", "7"}
    assert unseen_exclusions(Profiled, None) == [seen]
