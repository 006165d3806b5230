"""Options are declared as types: every part of a layer and every corpus declares its options
as a dataclass (type, default, help), and the layer, the schema, describe() (the MLflow
params), the dry run and docs/options.md all read those classes."""

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import pytest

import variants
from bench import data, plugins, run
from bench import options as command
from bench.config import ConfigError, corpus_options, resolve
from variants.layer_spec import LayerOptions

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "decay_plugin.py"


def test_the_committed_reference_is_what_the_classes_give(capsys):
    """docs/options.md is generated: an option added, renamed or re-explained without rerunning
    `python -m bench.options --write` fails here."""
    assert command.main(["--check"]) == 0, capsys.readouterr().out


def test_every_option_is_typed_defaulted_and_explained():
    """Each built-in variant's and corpus's options carry a type and a help sentence; only a
    file corpus's path is required."""
    declared = [*(o for n in variants.names() for o in variants.options(n).values()),
                *(o for n in data.names() for o in corpus_options(n).values())]
    assert declared and all(o.help and o.type is not None for o in declared)
    assert {(o.owner, o.name) for o in declared if o.required} == {("FileOptions", "path")}


def test_a_layer_reports_the_values_its_options_classes_resolve():
    """describe()["options"] (the MLflow layer.* params) is the layer's width and chunk plus
    the fields of the Options instances its parts were built with: every declared option but
    the layer's heads and policies, at the variant's defaults unless set."""
    for name in variants.names():
        layer = variants.build(name, d_model=32, n_heads=4, span=16)
        declared = variants.options(name)
        reported = layer.describe()["options"]
        heads_and_policies = {f.name for f in fields(LayerOptions)} - {"width", "chunk"}
        assert set(reported) == set(declared) - heads_and_policies, name
        assert all(reported[k] == declared[k].default for k in reported), name
    assert variants.build("adaptive", d_model=32, n_heads=4, span=16,
                          ramp=4.0).describe()["options"]["ramp"] == 4.0


def test_a_bad_option_is_refused_naming_it_its_variant_and_what_it_takes(clean):
    plugins.load([str(PLUGIN)])
    with pytest.raises(ConfigError, match=r"model\.attn\.tau_init='long': expected float .*; "
                       r"an option of variant 'decay', declared by DecaySpan.Options: each "
                       r"head's decay length"):
        resolve({"model": {"variant": "decay", "attn": {"tau_init": "long"}}})
    with pytest.raises(ConfigError, match=r"model\.attn\.tau=8: unknown option of variant "
                       r"'decay'; allowed: .*tau_init"):
        resolve({"model": {"variant": "decay", "attn": {"tau": 8}}})
    with pytest.raises(ConfigError, match=r"model\.attn\.tau_init=-1.0: expected tau > 0; an "
                       r"option of variant 'decay', declared by DecaySpan.Options"):
        resolve({"model": {"variant": "decay", "attn": {"tau_init": -1}}})


def test_a_corpus_declares_its_options_and_the_schema_checks_them_once():
    """A corpus registered with its options class: the schema types its options, refuses an
    unknown one and asks for a required one, in the options' one format, and the builder gets
    the instance the schema made, as it is."""

    @dataclass(frozen=True)
    class Options:
        size: int = field(metadata={"help": "symbols"})
        fill: str = field(default="a", metadata={"help": "the one symbol"})

    built = []

    def constant(o: Options) -> data.Corpus:
        built.append(o)
        return data.build("file", path=ROOT / "README.md")  # any corpus: only `o` is tested

    data.register("test-constant", Options, constant)
    try:
        taken = corpus_options("test-constant")
        assert taken["size"].default is MISSING and taken["fill"].type is str
        with pytest.raises(ConfigError, match=r"data\.size: required; an option of dataset "
                           r"'test-constant', declared by .*Options: symbols"):
            resolve({"data": {"name": "test-constant"}})
        with pytest.raises(ConfigError, match=r"data\.colour=1: unknown option of dataset "
                           r"'test-constant'; allowed: size, fill"):
            resolve({"data": {"name": "test-constant", "size": 3, "colour": 1}})
        with pytest.raises(ConfigError, match=r"data\.size='many': expected int"):
            resolve({"data": {"name": "test-constant", "size": "many"}})
        cfg = resolve({"data": {"name": "test-constant", "size": "3"}, "model": {"span": 8},
                       "train": {"block": 8, "batch_size": 1}})
        assert cfg.data.options == {"size": 3} and cfg.data.typed == Options(size=3)
        cfg.corpus()
        assert built == [Options(size=3)] and built[0] is cfg.data.typed
    finally:
        data.registry._BUILDERS.pop("test-constant")


def test_the_command_shows_a_plugins_options_and_refuses_an_unknown_name(clean, capsys):
    assert command.main(["decay", "--plugin", str(PLUGIN)]) == 0
    out = capsys.readouterr().out
    assert "variant `decay`: span policy `DecaySpan`, mixing `both`" in out
    assert "| tau_init  | float" in out and "DecaySpan.Options" in out
    assert command.main(["nope"]) == 2
    assert "'nope' is neither a variant nor a corpus; known: adaptive" in capsys.readouterr().err


def test_the_dry_run_lists_the_options_each_variant_runs_with(clean, capsys):
    """The decay grid's plan shows tau_init at its default for decay and '-' for talking heads,
    which does not take it, beside the options both take."""
    assert run.main([str(ROOT / "examples" / "decay.yaml"), "--dry-run"]) == 0
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and line.count("|") == 6}
    assert rows["option"][:3] == ["type", "talking-heads", "decay"]
    assert rows["tau_init"][:3] == ["float", "-", "20.0"]
    assert rows["mix_init"][1:3] == ["'identity'", "'identity'"]


def test_a_layer_built_in_python_converts_and_checks_its_options_as_the_schema_does():
    """variants.build, with no config around it, types each part's options by its class
    (lax: "16" a float) through the schema's validator, and a bad value reads as it does from
    a config, less its path: the option, its value, what was expected, the variant and the
    class that declares it; a value of the right type out of range is refused by the class's
    own check, in the same format."""
    layer = variants.build("adaptive", d_model=32, n_heads=4, span=16, ramp="16")
    assert layer.span_policy.ramp == 16.0 and layer.describe()["options"]["ramp"] == 16.0
    for attn, line in [
            ({"ramp": "wide"}, "ramp='wide': expected float (Input should be a valid number, "
             "unable to parse string as a number); an option of variant 'adaptive', declared "
             "by LearnedSpan.Options: R, the soft mask's ramp"),
            ({"ramp": -1}, "ramp=-1.0: expected R > 0; an option of variant 'adaptive', "
             "declared by LearnedSpan.Options"),
            ({"mix_init": "x", "mixing": "both"}, "mix_init='x': expected Literal['identity', "
             "'random']"),
            ({"h": 0}, "h=0: expected a positive int, or None for its default; an option of "
             "variant 'adaptive', declared by Heads")]:
        with pytest.raises(variants.OptionError) as python:
            variants.build("adaptive", d_model=32, n_heads=4, span=16, **attn)
        with pytest.raises(ConfigError) as config:
            resolve({"model": {"variant": "adaptive", "attn": attn}})
        assert str(python.value).startswith(line), str(python.value)
        assert f"\n  model.attn.{line}" in str(config.value), str(config.value)
    layer = variants.Attention(variants.spec("adaptive", 32, 4, 16, ramp="8"))
    assert layer.span_policy.ramp == 8.0  # the layer takes the spec as it is


def test_every_name_is_registered_by_a_call(clean):
    """A policy, a variant and a corpus are each registered by a call (no decorator, no dict
    to edit): a span policy registered by name is a variant's part by that name; a name
    registered twice, a class of the other kind and the earlier decorator form are refused,
    the last with the call to write."""
    from variants import layer_spec, registry
    from variants.span import FixedSpan

    try:
        variants.register_policy("span_policy", "test-window", FixedSpan)
        variants.register("test-windowed", span_policy="test-window")
        layer = variants.build("test-windowed", d_model=32, n_heads=2, span=16)
        assert layer.describe()["span_policy"] == "fixed"
        with pytest.raises(ValueError, match="span_policy 'test-window' is already registered"):
            variants.register_policy("span_policy", "test-window", FixedSpan)
        with pytest.raises(ValueError, match="not a subclass of MixingPolicy"):
            variants.register_policy("mixing", "test-mix", FixedSpan)
    finally:
        layer_spec.POLICIES["span_policy"].pop("test-window", None)
        registry._VARIANTS.pop("test-windowed", None)

    @dataclass(frozen=True)
    class Options:
        size: int = variants.option(1, "symbols")

    with pytest.raises(ValueError, match=r"data.register\('test-old', Options, <your builder>\)"):
        data.register("test-old", Options)
    assert "test-old" not in data.names()
