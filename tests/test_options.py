"""Options are declared as types: every part of a layer and every corpus declares its options
as a dataclass (type, default, help), and the layer, the schema, describe() (the MLflow
params), the dry run and docs/options.md all read those classes."""

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import pytest

import variants
from bench import data, plugins
from bench.commands import options as command
from bench.commands import run
from bench.config import ConfigError, corpus_options, resolve
from variants.attention import LayerOptions

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
    with pytest.raises(ConfigError, match="tau_init=-1.0 is invalid: expected tau > 0"):
        resolve({"model": {"variant": "decay", "attn": {"tau_init": -1}}})


def test_a_corpus_declares_its_options_and_build_checks_them():
    """A corpus registered with its options class: the schema types its options, build
    refuses an unknown one and asks for a required one, and the builder gets the instance."""

    @dataclass(frozen=True)
    class Options:
        size: int = field(metadata={"help": "symbols"})
        fill: str = field(default="a", metadata={"help": "the one symbol"})

    @data.register("test-constant", Options)
    def constant(o: Options) -> data.Corpus:
        return data.build("file", path=ROOT / "README.md")  # any corpus: only `o` is tested

    try:
        taken = corpus_options("test-constant")
        assert taken["size"].default is MISSING and taken["fill"].type is str
        with pytest.raises(data.DataError, match=r"test-constant: size= is required"):
            data.build("test-constant")
        with pytest.raises(data.DataError, match=r"unknown options \['colour'\]; known: size"):
            data.build("test-constant", size=3, colour=1)
        with pytest.raises(ConfigError, match=r"data\.size='many': expected int"):
            resolve({"data": {"name": "test-constant", "size": "many"}})
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
    (lax: "16" a float) and names the option, the part and the expected type when one is
    wrong; a value of the right type out of range is refused by the class's own check."""
    layer = variants.build("adaptive", d_model=32, n_heads=4, span=16, ramp="16")
    assert layer.span_policy.ramp == 16.0 and layer.describe()["options"]["ramp"] == 16.0
    with pytest.raises(ValueError, match=r"ramp='wide' is invalid for span policy adaptive: "
                       r"expected float"):
        variants.build("adaptive", d_model=32, n_heads=4, span=16, ramp="wide")
    with pytest.raises(ValueError, match=r"mix_init='x' is invalid for mixing both: expected "
                       r"Literal\['identity', 'random'\]"):
        variants.build("talking-heads", d_model=32, n_heads=4, span=16, mix_init="x")
    with pytest.raises(ValueError, match=r"ramp=-1.0 is invalid: expected R > 0"):
        variants.build("adaptive", d_model=32, n_heads=4, span=16, ramp=-1)
