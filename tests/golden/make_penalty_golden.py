"""Golden files for the repetition penalty (decode/sampling.h, kernels/penalties.h): greedy generations
that `transformers` makes with repetition_penalty (its RepetitionPenaltyLogitsProcessor: a token of
the prompt or the output has a positive logit divided by the penalty, a negative one multiplied) from
the tiny random models make_hf_golden.py saved.

    python3 tests/golden/make_penalty_golden.py     # pyenv python3: pip install torch transformers

Writes tests/golden/hf/<case>/penalties.json: for each penalty, the token ids generated after the text
prompt (20 at most, without the model's end of text) and their text. python/tests/test_pretrained.py
compares qkv's generate with them.
"""
import json
import os

import torch
import transformers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf")
CASES = ["gpt2", "llama-gqa", "qwen2"]
PENALTIES = [1.3, 0.7, 2.0]


def main():
    for name in CASES:
        folder = os.path.join(HERE, name)
        with open(os.path.join(folder, "reference.json"), encoding="utf-8") as f:
            prompt_ids = json.load(f)["text_prompt_ids"]
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        out = {"transformers": transformers.__version__, "torch": torch.__version__, "max_new_tokens": 20,
               "generations": []}
        for r in PENALTIES:
            with torch.no_grad():
                ids = model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids),
                                     dtype=torch.long), max_new_tokens=20, do_sample=False, repetition_penalty=r,
                                     pad_token_id=model.config.vocab_size - 1)[0, len(prompt_ids):].tolist()
            if ids and ids[-1] in eos:
                ids = ids[:-1]  # qkv returns the text without its end token
            out["generations"].append({"repetition_penalty": r, "ids": ids, "text": tokenizer.decode(ids)})
        with open(os.path.join(folder, "penalties.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        print(name, [g["ids"][:6] for g in out["generations"]])


if __name__ == "__main__":
    main()
