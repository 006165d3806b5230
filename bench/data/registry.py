"""Registry of corpora, as variants have one: `register(name, options, build)` a builder with the
class of its options, by a call as a variant or a policy is registered, `build(name, **options)` it.
A corpus declares its options as a frozen dataclass (a field per data.<option>: its type, its
default, and a help sentence as `metadata["help"]`), which the run's schema types and checks (the
one validator of options, `bench.config`) and the docs list (`options(name)`); the builder takes the
instance the schema made as it is. `vocab`, where given, says the corpus's vocabulary from its
options without building it (`vocab_size`): the findings refuse bits above its log2
(`bench.findings.reading.perseed.highest`)."""

from collections.abc import Callable
from typing import Any

from .corpus import Corpus, DataError

Builder = Callable[[Any], Corpus]
_BUILDERS: dict[str, tuple[Builder, type]] = {}  # name -> its builder, its options' class
_VOCABS: dict[str, Callable[[Any], int]] = {}  # name -> its vocabulary from its options


def register(name: str, options: type, build: Builder | None = None,
             vocab: Callable[[Any], int] | None = None) -> None:
    """Register `build(o: options) -> Corpus` as corpus `name` (data.name), its options
    declared by the frozen dataclass `options`, and `vocab(o)`, the vocabulary size the corpus
    built from `o` has (None: not known before it is built); a ValueError for a name already
    registered, or without `build` (the decorator form is gone: it names the call to write)."""
    if build is None:
        raise ValueError(f"corpus {name!r}: register(name, options, build) takes the builder "
                         f"as its third argument: data.register({name!r}, "
                         f"{getattr(options, '__name__', options)}, <your builder>) after it, "
                         "not as a decorator")
    if name in _BUILDERS:
        raise ValueError(f"corpus {name!r} is already registered")
    _BUILDERS[name] = build, options
    if vocab is not None:
        _VOCABS[name] = vocab


def vocab_size(name: str, typed: Any) -> int | None:
    """The vocabulary corpus `name` built from `typed` (an instance of its options class)
    has, without building it; None where its registration does not say."""
    check_name(name)
    return _VOCABS[name](typed) if name in _VOCABS else None


def names() -> list[str]:
    """Registered corpus names, sorted."""
    return sorted(_BUILDERS)


def check_name(name: str) -> None:
    """Raise a DataError naming `name` and the registered corpora if it is unknown."""
    if name not in _BUILDERS:
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(names())}")


def build(name: str, **given) -> Corpus:
    """The corpus registered as `name`, built with `given` options, the fields of its options'
    class as its constructor takes them (Python code; a config's are typed and checked by the
    run's schema, whose instance `fitted` takes)."""
    typed = options(name)(**given)  # options() checks the name
    return _BUILDERS[name][0](typed)


def options(name: str) -> type:
    """The class that declares corpus `name`'s options (a frozen dataclass: their types,
    defaults and help)."""
    check_name(name)
    return _BUILDERS[name][1]


def fitted(name: str, typed: Any, *, span: int, block: int, batch_size: int) -> Corpus:
    """Corpus `name` built from `typed`, an instance of its options class (the run's schema's),
    checked against a model's span and the training sizes: a DataError when a probe's episodes
    outgrow the span, a split cannot fill the blocks, or the span is longer than a training
    stream can hold."""
    check_name(name)
    corpus = _BUILDERS[name][0](typed)
    need = batch_size * (block + 1)
    if len(corpus.train) < need:
        raise DataError(f"train.block={block} x train.batch_size={batch_size} needs {need} "
                        f"training tokens; the {name} train split has {len(corpus.train)}")
    row = len(corpus.train) // batch_size  # each stream's characters (`train_batches`)
    if span > row - block - 1:
        raise DataError(f"model.span={span}: the {name} train split's {batch_size} streams "
                        f"hold {row} characters each, so no block of {block} sees {span} back "
                        f"(at most {row - block - 1}); a longer corpus, a smaller "
                        "train.batch_size or a shorter span")
    for key, need in corpus.needs_span().items():
        if span < need:
            raise DataError(f"{key}: an episode needs model.span >= {need} (one head's window "
                            "must hold it from its last answer back to its delimiter); "
                            f"model.span is {span}: fewer keys or queries, or a longer span")
    for split in ("dev", "test"):
        if len(corpus.split(split)) <= block:
            raise DataError(f"train.block={block} is longer than the {name} {split} split "
                            f"({len(corpus.split(split))} tokens)")
    return corpus
