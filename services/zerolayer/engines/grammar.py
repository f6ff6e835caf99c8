"""Grammar-constrained decoding and log-probabilities for engines that sample themselves.

`Grammars` compiles a request's Constraint (zerolayer.protocol) with xgrammar for one tokenizer
and hands out a `Guide` per request: before each token the guide masks the logits to the tokens
the grammar allows next, and after it the guide advances. Compiled grammars are cached by the
compiler, so a schema sent with every request compiles once.

`Vocabulary` turns token ids into the token text and bytes that OpenAI's logprobs carry, from
the same byte-level view of the vocabulary xgrammar builds (a token may be part of a UTF-8
character: its text is then `bytes:` and the escaped bytes, as OpenAI writes such tokens).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

import torch

from zerolayer.errors import InvalidRequest
from zerolayer.protocol import Constraint, TokenLogprob, TopLogprob

__all__ = ["Grammars", "Guide", "Vocabulary", "token_logprobs", "check_constraint"]

log = logging.getLogger(__name__)


def _xgr() -> Any:
    import xgrammar

    return xgrammar


class Vocabulary:
    """Token text and bytes by id, for one tokenizer; `ends`: its end-of-sequence ids, which
    carry no text and get no logprobs entry (as OpenAI's answers have none for them)."""

    def __init__(self, info: Any):
        self._bytes: list[bytes] = list(info.decoded_vocab)
        self.ends = frozenset(int(t) for t in info.stop_token_ids)

    def bytes_of(self, token_id: int) -> bytes:
        return self._bytes[token_id] if 0 <= token_id < len(self._bytes) else b""

    def text_of(self, token_id: int) -> str:
        raw = self.bytes_of(token_id)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def token_logprobs(
    vocab: Vocabulary, logits: torch.Tensor, chosen: Iterable[int], top: int
) -> list[TokenLogprob] | None:
    """Per row of `logits` (rows x vocabulary, before any temperature or mask) the chosen
    token's log-probability and the `top` most likely tokens; None when every chosen token
    ends the sequence."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return entries(vocab, logp if logp.dim() == 2 else logp.unsqueeze(0), chosen, top)


def entries(
    vocab: Vocabulary, logp: torch.Tensor, chosen: Iterable[int], top: int
) -> list[TokenLogprob] | None:
    """token_logprobs of rows already log-softmaxed (rows x vocabulary)."""
    ids = list(chosen)
    picked = logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
    best = logp.topk(top, dim=-1) if top else None
    out = []
    for row, (tok, lp) in enumerate(zip(ids, picked, strict=True)):
        if tok in vocab.ends:
            continue
        alts = []
        if best is not None:
            for t, v in zip(best.indices[row].tolist(), best.values[row].tolist(), strict=True):
                alts.append(TopLogprob(vocab.text_of(t), list(vocab.bytes_of(t)), v))
        out.append(TokenLogprob(vocab.text_of(tok), list(vocab.bytes_of(tok)), lp, alts))
    return out or None


def _grammar(c: Constraint) -> Any:
    """The grammar of a constraint (no tokenizer needed); InvalidRequest when it cannot be
    built."""
    xgr = _xgr()
    try:
        if c.kind == "json_object":
            return xgr.Grammar.builtin_json_grammar()
        if c.kind == "json_schema":
            return xgr.Grammar.from_json_schema(c.spec, any_whitespace=False, strict_mode=True)
        if c.kind == "structural_tag":
            return xgr.Grammar.from_structural_tag(c.spec)
        if c.kind == "regex":
            return xgr.Grammar.from_regex(c.spec)
    except (RuntimeError, ValueError) as exc:
        raise InvalidRequest(f"the grammar cannot be built: {_first_line(exc)}") from None
    raise InvalidRequest(f"unknown constraint kind {c.kind!r}")


def check_constraint(c: Constraint) -> None:
    """Raise InvalidRequest when the constraint cannot compile (checked without a tokenizer,
    as the gateway does before a request is sent to a tier)."""
    _grammar(c)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    # xgrammar prefixes a time and a source position: keep the message
    return line.split(": ", 2)[-1] if line.startswith("[") else line


def bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """A token bitmask of `rows` rows (Guide.fill writes one, apply_masks applies them)."""
    return _xgr().allocate_token_bitmask(rows, vocab_size)


def apply_masks(logits: torch.Tensor, masks: torch.Tensor, rows: list[int]) -> None:
    """Set every token a row's grammar forbids to -inf, for these rows of a batch's logits
    (rows x vocabulary, in place); the other rows are untouched."""
    _xgr().apply_token_bitmask_inplace(logits, masks.to(logits.device), indices=rows)


class Guide:
    """One request's grammar state: mask(logits) (or fill(bitmask, row) for a batch) before a
    token, advance(token) after it; or offer(token) first, which takes a token the grammar
    allows without computing a mask at all (a mask is then needed only when it refuses)."""

    def __init__(self, matcher: Any, vocab_size: int):
        self._matcher = matcher
        self._mask = bitmask(1, vocab_size)
        self._taken = False  # offer() took the token that advance() is told of next

    def offer(self, token: int) -> bool:
        """Take `token` if the grammar allows it next (True); otherwise nothing changes
        (False), and the token must be chosen again from the masked logits. A token drawn from
        the unmasked distribution and kept only when allowed, else drawn again from the masked
        one, has exactly the masked distribution (and a greedy pick is the masked argmax), as
        long as nothing else (top_p) depends on which tokens the mask keeps."""
        if self._matcher.accept_token(token):
            self._taken = True
            return True
        return False

    def fill(self, masks: torch.Tensor, row: int) -> None:
        """Write the tokens the grammar allows next into row `row` of a batch's bitmask."""
        self._matcher.fill_next_token_bitmask(masks, row)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits (one row, float32 on the CPU) with every token the grammar forbids next
        set to -inf, in place."""
        self._matcher.fill_next_token_bitmask(self._mask)
        _xgr().apply_token_bitmask_inplace(logits, self._mask.to(logits.device))
        return logits

    def advance(self, token: int) -> bool:
        """Take the sampled token; True when the output ends there: the grammar is complete,
        or it refused the token (it cannot, having masked the others; the request then ends
        rather than go on unconstrained)."""
        if self._taken:
            self._taken = False
        elif not self._matcher.accept_token(token):
            log.warning("the grammar refused token %d it allowed; the output ends", token)
            return True
        return bool(self._matcher.is_terminated())


class Grammars:
    """xgrammar's compiler for one tokenizer, with its cache; see the module doc."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]):
        xgr = _xgr()
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self.vocab = Vocabulary(self.info)

    def compile(self, c: Constraint) -> Any:
        """The compiled grammar; InvalidRequest when it cannot be built."""
        grammar = _grammar(c)
        try:
            return self.compiler.compile_grammar(grammar)
        except (RuntimeError, ValueError) as exc:
            raise InvalidRequest(f"the grammar cannot be built: {_first_line(exc)}") from None

    def guide(self, c: Constraint) -> Guide:
        """A fresh grammar state for one request."""
        return Guide(_xgr().GrammarMatcher(self.compile(c)), self.vocab_size)


def dumps(value: Any) -> str:
    """JSON text of a schema, as Constraint.spec carries it."""
    return json.dumps(value, separators=(",", ":"), sort_keys=False)
