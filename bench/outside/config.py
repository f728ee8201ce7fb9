"""The scratch matrix for the held-out outside bodies: models.yaml's models, engines, model-wide
invariants and pins as committed, every model's shapes replaced by the bodies of one folder here
(bench/outside/bodies/ unless another is named: `python config.py bodies2`) and no dialect cases.
Written to bench/outside/models.yaml (never committed; run.sh writes it each time)."""
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def main() -> None:
    bodies = sys.argv[1] if len(sys.argv) > 1 else "bodies"
    if not (HERE / bodies).is_dir():
        sys.exit(f"config.py: no folder {bodies} in {HERE}")
    config = yaml.safe_load((ROOT / "models.yaml").read_text())
    config["dialects"] = "none"
    for name, model in config["models"].items():
        model["shapes"] = {"only": [], "requests": [f"{bodies}/*.json"]}
        model.pop("dialects", None)
        if isinstance(model.get("parse"), dict):   # the output axis: the matrix's own cases, not these bodies
            model["parse"]["shapes"] = {"only": []}
        model.pop("prefix_tails", None)
        # reviewed invariants scoped to the matrix's own cases cannot apply here (they would only be
        # reported stale); the model-wide ones are the matrix's review and stay
        invariants = [entry for entry in model.get("invariants", []) if "cases" not in entry]
        if invariants:
            model["invariants"] = invariants
        else:
            model.pop("invariants", None)
        for key in ("tokenizer", "template"):   # relative paths stay relative to the repository
            source = model.get(key)
            if isinstance(source, dict):
                for field in ("file", "dir", "gguf"):
                    if field in source and not Path(source[field]).is_absolute():
                        source[field] = str(ROOT / source[field])
    out = HERE / "models.yaml"
    out.write_text(f"# written by bench/outside/config.py: the outside bodies of {bodies}/ on every model\n"
                   + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    print(out, file=sys.stderr)


if __name__ == "__main__":
    main()
