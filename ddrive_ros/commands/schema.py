"""`ddrive schema`: per section editable / scaffold / block counts of an output schema."""
from __future__ import annotations

import argparse
import json


def register(sub) -> None:
    p = sub.add_parser("schema", help="show an output schema's sections, editable/scaffold positions and blocks")
    p.add_argument("--schema", default="fast_ddrive", help="schema name under config/schema or a YAML path")
    p.add_argument("--block-size", type=int, default=None, help="block size (default: the schema's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ddrive_ros.scaffold.schema import Schema

    schema = Schema.load(args.schema)
    bs = args.block_size or schema.default_block_size
    rows = schema.summary(bs)
    if args.json:
        print(json.dumps({"schema": schema.name, "block_size": bs,
                          "sections": [{k: r[k] for k in ("name", "editable", "scaffold", "blocks")} for r in rows]}))
        return 0
    print(f"schema {schema.name}, block size {bs}")
    print(f"{'section':<22}{'editable':>9}{'scaffold':>9}{'blocks':>7}{'weight':>8}  noise Beta(a,b)")
    for r in rows:
        print(f"{r['name']:<22}{r['editable']:>9}{r['scaffold']:>9}{r['blocks']:>7}{r['loss_weight']:>8.1f}  {tuple(r['noise_beta'])}")
    tot = lambda k: sum(r[k] for r in rows)  # noqa: E731
    print(f"{'total':<22}{tot('editable'):>9}{tot('scaffold'):>9}{tot('blocks'):>7}")
    return 0
