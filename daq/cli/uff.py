"""``hil import uff``: Universal File Format dataset 58 FRF files -> one machine-tool session.

(The other direction is ``hil export SESSION --format uff``.) Reading is all-or-nothing: every file is
read and checked before the session is created, so a bad file leaves the store as it was.
"""

from __future__ import annotations

import click

from daq import json_codec
from daq.cli.common import CliState, pass_state
from daq.config.load import store_path_for
from daq.rigs.config import load_config
from daq.store.read_write import SessionStore


@click.group("import")
def import_group() -> None:
    """Turn data measured elsewhere into a session (UFF 58 FRFs from a modal-analysis system)."""


@import_group.command("uff")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--config", "config_path", default=None, metavar="CONFIG",
              help="A machine-tool config: its [analysis] (and [rig] name, [store]) go with the session; "
                   "its plan is replaced by the files' positions.")
@click.option("--map", "map_file", default=None, metavar="FILE",
              help='TOML: [nodes] number = "T1" ... and [files."name.unv"] position = 0.05 (m), '
                   'role = "validation"; over the id-line tokens.')
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (only JSON on stdout).")
@pass_state
def uff(state: CliState, files: tuple[str, ...], config_path: str | None, map_file: str | None,
        as_json: bool) -> None:
    """Import UFF 58 FRF files (accelerance, mobility or receptance; coherence optional) as a
    machine-tool session that `hil analyze` runs on.

    Position and role per FRF come from 'position=<m> m role=identification|validation' in an id line
    (as `hil export --format uff` writes them) or from the --map file; response and reference DOFs from
    the node/direction fields.
    """
    from daq.rigs.machine_tool.uff import import_uff, prepare_import  # lazy: the machine-tool rig kind, scipy

    config = load_config(config_path) if config_path else None  # TOML data: the import builds on it
    path = store_path_for(state.store_option, config if config is not None else state.config)
    prepared = prepare_import(list(files), config=config, map_file=map_file)  # before the store is opened
    with SessionStore(path, create=True) as store:
        result = import_uff(store, list(files), prepared=prepared)
    if as_json:
        click.echo(json_codec.dumps(result.as_dict(), indent=2))
        return
    click.echo(f"session   {result.session_id} (machine-tool, imported)")
    click.echo(f"store     {result.store}")
    for f in result.files:
        skipped = ", ".join(f"{n} x dataset {t}" for t, n in f["skipped"].items())
        click.echo(f"file      {f['file']}: {f['datasets_58']} dataset(s) 58" + (f"; skipped {skipped}" if
                                                                                  skipped else ""))
    for p, r in zip(result.positions, result.roles, strict=True):
        click.echo(f"position  {1000 * p:7.1f} mm  {r}")
    click.echo(f"FRFs      {result.frfs}: inputs {', '.join(result.inputs)} x {result.responses} responses, "
               f"{result.n_freq} lines {result.f_range[0]:g}-{result.f_range[1]:g} Hz, accelerance m/s^2/N, "
               f"coherence {'yes' if result.coherence else 'no'}")
    click.echo(f"took      {result.seconds:.2f} s")

