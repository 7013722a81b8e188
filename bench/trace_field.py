"""Follow one scenario field from YAML to the output files, counting the modules it passes.

``python bench/trace_field.py [SCENARIO] [--field economics.pue]`` runs ``dcsim run
SCENARIO --out TMP`` (arrivals cut to 20 s so the trace stays small) under a profiler
that records every call of dcsim's own code (``sim``, ``fleets``, ``traffic``) whose
arguments hold the field's carrier: the raw YAML mapping, the validated
:class:`~sim.scenario.Scenario`, or the object the field lives on (``economics``).
Consecutive calls in one module count once, so the record is the path of modules the
field travels; it prints the number of modules on the path, the distinct steps between
them, how many times the path comes back to a module it had left ("returns"), and the
path itself. Run it with ``DCSIM_PURE_PYTHON=1``: calls inside compiled modules are not
seen by the profiler.

This is the measure issue 22 asks for ("the path of one scenario field from YAML to
output, counted by following the calls"); it says how far the scenario object travels,
not how fast anything runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

OURS = ("sim", "fleets", "traffic")


def follow(scenario: Path, field: str) -> list[str]:
    """The modules, in call order (consecutive repeats merged), whose functions received
    the field's carrier as an argument while ``dcsim run`` handled ``scenario``."""
    import yaml

    from sim import loader, scenario as schema

    head = field.split(".")[0]
    carriers: list[object] = []
    path: list[str] = []

    def holds(frame) -> bool:
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        return any(any(frame.f_locals.get(n) is c for c in carriers) for n in names)

    def profile(frame, event, _arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] in OURS and carriers and holds(frame):
            if not path or path[-1] != module:
                path.append(module)

    parse, validate = loader.parse_yaml, schema.Scenario.model_validate

    def parse_and_watch(text, source):  # the raw mapping, as soon as YAML made it
        loaded = parse(text, source)
        if isinstance(loaded.data, dict):
            carriers.append(loaded.data)
        return loaded

    def validate_and_watch(data, *args, **kwargs):
        scenario_obj = validate(data, *args, **kwargs)
        carriers.extend([scenario_obj, getattr(scenario_obj, head, None)])
        return scenario_obj

    loader.parse_yaml = parse_and_watch
    schema.Scenario.model_validate = validate_and_watch
    from sim.cli import main

    text = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    text["duration_s"], text["warmup_s"] = 20.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        short = Path(tmp) / scenario.name
        short.write_text(yaml.safe_dump(text), encoding="utf-8")
        sys.setprofile(profile)
        try:
            main(["run", str(short), "-q", "--out", str(Path(tmp) / "out")])
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)
    return path


def returns(path: list[str]) -> int:
    """How many times the path enters a module it had already left."""
    seen, back = set(), 0
    for module in path:
        back += module in seen
        seen.add(module)
    return back


def edges(path: list[str]) -> set[tuple[str, str]]:
    """The distinct module-to-module steps of the path."""
    return set(zip(path, path[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/default.yaml", type=Path)
    parser.add_argument("--field", default="economics.pue")
    args = parser.parse_args()
    path = follow(args.scenario.resolve(), args.field)
    print(f"{args.field}: {len(set(path))} modules, {len(edges(path))} distinct steps between them, "
          f"{returns(path)} returns to a module already left, {len(path)} steps in all")
    print(" -> ".join(path))


if __name__ == "__main__":
    main()
