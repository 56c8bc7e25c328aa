"""The WordPiece vocabulary the encoder benchmarks share (bench/encoders_vs_peers.py,
bench/rerank_vs_peers.py): BERT's special tokens, every character alone and as a "##"
continuation, then the most frequent words of `texts`, lower-cased — 30,522 pieces, BERT-base's
size — as a lower-casing BertNormalizer / BertPreTokenizer tokenizer with [CLS] $A [SEP] (token
types), wrapped as transformers wraps a tokenizer.json."""
import collections
import re


def pieces(texts, size=30522):
    words = collections.Counter(w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower()))
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = sorted({c for w in words for c in w})
    out = special + chars + ["##" + c for c in chars]
    return out + [w for w, _ in words.most_common() if len(w) > 1][:size - len(out)]


def tokenizer(texts):
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(pieces(texts))}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
