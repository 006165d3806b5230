"""Probe episodes of the built-in corpus: associative recall, each probe isolating one mechanism,
with exact floors on its target symbols (the answers), with recall and without it.

An episode opens with its probe's delimiter, lays out records that each join a key and its
value, then asks queries whose answers are the values. A model that recalls (matches a query to
its record) answers in 0 bits once the record is in reach. `without_recall` is what the best
model that never makes that match pays while it sees the episode whole: it still sees which
values the records hold and the answers already given, so it is not log2 V bits.

- `Recall`: MQAR-like associative recall in one-symbol records (so no two-token binding has to
  be learned): N records R(k, v_k), values iid uniform over V, then Q pairs Q(c) A(v_c) with c
  drawn with replacement, uniform over the recorded keys. By default every key of the alphabet
  is recorded, in key order (keyed recall); with `stored` < `keys`, each episode records
  `stored` keys drawn afresh, in a random order, so a head must match a query to its record by
  content: no fixed head can wait for one key once the alphabet outnumbers what the heads can
  each single out. Its answers are scored in two parts: first-asked (the key not asked before
  in the episode) and repeated (a model copies the earlier answer, no recall needed).
- `Conjunctive`: conjunctive recall: a grid of g a's and g b's drawn per episode, g^2 records
  C(a, b, v_ab) in a random order, then Q triples X(a) Y(b) A(v_ab): each a and each b is
  shared by g records, so only both key symbols together name one. The query's two symbols
  must first meet in one position (a head one step back), then match the record.
- `MQAR`: multi-query associative recall as zoology defines it (HazyResearch's
  `multiquery_ar.py`; Arora et al. 2023): records of two tokens, key then value (the model must
  bind them), N distinct keys of `keys` and N distinct values of `values` drawn per episode;
  then Q <= N of the stored keys, each asked once in a random order, as its key token again,
  answered by its value token; optionally each query after a power-law number of blanks.

A head of width d_k scores a query against a key with a rank-d_k bilinear form; with d_k small
(many heads at a constant width) it cannot single out one of many keys by content, the low-rank
bottleneck behind talking-heads Table 1, while pre-softmax mixing (P_l) adds logits across
heads into one wider match.
"""

from .base import FusedRecords, Probe
from .conjunctive import Conjunctive
from .mqar import MQAR
from .recall import Recall, first_asked

# The built-in corpus's probes: each is an option of its `SyntheticOptions` (data.<name>)
# and a target set it scores. A new probe is a module here and an entry in this tuple.
PROBES = (Recall, Conjunctive, MQAR)

__all__ = ["MQAR", "PROBES", "Conjunctive", "FusedRecords", "Probe", "Recall", "first_asked"]
