"""The CLI starts without importing libcst, git, docker or pydantic: `forgepatch --help` loads
the command table (cli.COMMANDS) and no command module; each command's module is loaded
when it runs (docs/architecture.md, Layers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_help_does_not_import_heavy_modules():
    code = ("import sys\nfrom forgepatch.cli import main\n"
            "rc = main(['--help'])\n"
            "heavy = sorted(m for m in ('libcst', 'git', 'docker', 'pydantic', 'rich', 'elftools') if m in sys.modules)\n"
            "commands = sorted(m for m in sys.modules if m.startswith('forgepatch.cli.') and not m.startswith('forgepatch.cli._'))\n"
            "print(rc, heavy, commands)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 [] []"


def test_a_command_loads_its_own_module_only():
    code = ("import sys\nfrom forgepatch.cli import main\n"
            "rc = main(['cache', '--help'])\n"
            "print(rc, sorted(m for m in sys.modules if m.startswith('forgepatch.cli.') and not m.startswith('forgepatch.cli._')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 ['forgepatch.cli.cache']"


def test_the_command_table_names_every_command_with_its_own_first_sentence():
    """cli.COMMANDS lists each command of each module, in the module that registers it, with
    the line its own help starts with (what --help shows for it, no module loaded)."""
    from forgepatch import cli

    modules = {module for module, _ in cli.COMMANDS.values()}
    found = {}
    for module in sorted(modules):
        for name, command in cli.load_commands(module).items():
            found[name] = (module, command.get_short_help_str(1000))
    assert found == cli.COMMANDS
    shipped = {p.stem for p in (Path(cli.__file__).parent).glob("*.py") if not p.name.startswith("_")}
    assert modules == shipped  # every command module is in the table


def test_probe_module_imports_without_cli_dependencies():
    code = ("import sys\nimport forgepatch.arch, forgepatch.errors\n"
            "print(sorted(m for m in ('typer', 'libcst', 'git', 'docker', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
