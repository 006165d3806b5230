"""Registry of corpora, as variants have one: `register` a builder, `build(name, **options)` it;
the builder's signature is the check of its options (`options(name)`)."""

import inspect
from collections.abc import Callable

from .corpus import Corpus, DataError

Builder = Callable[..., Corpus]
_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: register `fn(**options) -> Corpus` as corpus `name` (data.name)."""

    def wrap(fn: Builder) -> Builder:
        if name in _BUILDERS:
            raise ValueError(f"corpus {name!r} is already registered")
        _BUILDERS[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    """Registered corpus names, sorted."""
    return sorted(_BUILDERS)


def check_name(name: str) -> None:
    """Raise a DataError naming `name` and the registered corpora if it is unknown."""
    if name not in _BUILDERS:
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(names())}")


def build(name: str, **given) -> Corpus:
    """The corpus registered as `name`, built with `given` options (its builder's keywords); a
    DataError naming an option it does not take or a required one that is missing."""
    takes = options(name)
    if unknown := sorted(set(given) - set(takes)):
        raise DataError(f"{name}: unknown options {unknown}; known: {', '.join(takes)}")
    if missing := [k for k, p in takes.items() if p.default is p.empty and k not in given]:
        raise DataError(f"{name}: {missing[0]}= is required")
    return _BUILDERS[name](**given)


def options(name: str) -> dict[str, inspect.Parameter]:
    """The options `build(name, ...)` accepts, with their annotations and defaults."""
    check_name(name)
    return dict(inspect.signature(_BUILDERS[name], eval_str=True).parameters)


def fitted(name: str, options: dict, *, span: int, block: int, batch_size: int) -> Corpus:
    """Corpus `name` (`build`), checked against a model's span and the training sizes: a
    DataError when a probe's episodes outgrow the span, a split cannot fill the blocks, or the
    span is longer than a training stream can hold."""
    corpus = build(name, **options)
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
