"""`stack build`: resolve a run.yaml and render what it takes to deploy it.

The output directory gets these files, each from a jinja2 template in `builder/templates/`:

- `run.yaml`: the source file verbatim under a header recording how it resolved at build time.
  It is copied rather than re-serialised from the validated config because the validated config
  has its `${env.*}` references substituted: writing it back would bake the build machine's
  environment (secrets included) into the deployment, instead of letting the deployed stack read
  its own.
- `requirements.txt`: the server (builder/server_source.py: a wheel of the checkout or wheel this
  server runs from, in `wheels/`, or `stack==<version>` from the index it came from), then the
  packages of the providers that were active at build time (each spec's `pip_packages`, and what
  its config needs: `config_packages`), sorted and deduplicated, each under a comment naming the
  providers that need it. Providers inactive at build time (an `enabled_if_env` variable unset)
  are listed last with their packages commented out and the variables that would enable them:
  the deployed environment may well set those variables, but installing packages for providers
  that will not run is the deployer's call, not the builder's. It is installed from the output
  directory (the server's wheel is a path relative to it).
- `Containerfile`: a build stage with a compiler makes a wheel of every requirement (llama.cpp
  has none for Linux on the index: it is compiled there); the image installs those wheels on
  python:3.11-slim and runs the stack as an unprivileged user, with a health check on
  /v1/health, keeping provider state on a `/data` volume.
- `launch.sh`: starts the stack from the rendered run.yaml, in the built venv if there is one.

With a venv path, a virtual environment is created with the running interpreter and the
requirements are installed into it from the output directory, pip's output streamed through.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from builder.errors import ConfigError
from builder.load import find_config
from builder.plugins import PluginLoadError, load_spec, provider_distribution
from builder.resolve import InactiveProvider, PlannedProvider, StackPlan, load_plan
from builder.server_source import WHEELS_DIR, locate_server
from contract.spec import Api, ProviderSpec

__all__ = [
    "build",
    "create_venv",
    "install_requirements",
    "render_containerfile",
    "render_launch_script",
    "render_requirements",
    "render_run_yaml",
    "write_build",
]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
SpecLoader = Callable[[Api, str], ProviderSpec]


def build(source: str | Path, output: str | Path | None, venv: str | Path | None, env: Mapping[str, str]) -> int:
    """Resolve `source`, render the deployment files into `output`, optionally build `venv`.

    Config problems raise ConfigError (the CLI prints them as one line); a failing venv
    creation or pip install is reported on stderr and returns 1.
    """
    path = find_config(source)
    plan = load_plan(path, env, for_build=True)
    directory = Path(output) if output is not None else Path(f"{plan.config.name}-build")
    venv_path = Path(venv).expanduser().absolute() if venv is not None else None
    server = locate_server(env)
    _prepare_output(directory, path)
    server = server.materialize(directory)
    print(f"server: {server.origin}")
    for provider in plan.providers:
        if provider.deferred_env:
            print(f"{provider.path}: reads {', '.join(provider.deferred_env)}, unset here: its config is checked where the stack runs")
    for file in write_build(plan, path, directory, venv_path, server.requirement):
        print(f"wrote {file}")
    if venv_path is not None and _build_venv(venv_path, directory / "requirements.txt") != 0:
        return 1
    print(f"launch with: {directory / 'launch.sh'}  (or build an image: podman build -t {plan.config.name} {directory})")
    return 0


def write_build(plan: StackPlan, source: Path, output: Path, venv: Path | None, server: str) -> list[Path]:
    """Render every file of a build into `output` (created if needed); returns the paths written.
    `server` is the requirement line that installs the server (`ServerSource.requirement`)."""
    _prepare_output(output, source)
    try:
        source_text = source.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read: {error.strerror}", source=str(source)) from None
    files = {
        "run.yaml": render_run_yaml(plan, source_text, str(source)),
        "requirements.txt": render_requirements(plan, server),
        "Containerfile": render_containerfile(plan, wheels=server.startswith(f"./{WHEELS_DIR}/")),
        "launch.sh": render_launch_script(plan, venv),
    }
    written = [_write(output / name, text) for name, text in files.items()]
    # Executable so it can be started as ./launch.sh, like any rendered entry point.
    (output / "launch.sh").chmod(0o755)
    return written


def render_run_yaml(plan: StackPlan, source_text: str, source: str) -> str:
    """The source run.yaml verbatim, under a header recording what was active at build time."""
    return _render(
        "run.yaml.j2",
        source=source,
        source_text=source_text,
        active=[_label(p.api, p.provider_id, p.spec.name) + (f" (config checked where it runs: reads {', '.join(p.deferred_env)})"
                                                            if p.deferred_env else "") for p in plan.providers],
        inactive=[f"{_label(p.api, p.provider_id, p.provider_type)}: {p.hint()}" for p in plan.inactive],
        served=", ".join(api.value for api in plan.served_apis),
    )


def render_requirements(plan: StackPlan, server: str, load: SpecLoader = load_spec) -> str:
    """requirements.txt: `server` (left out if empty), the active providers' packages, then the
    inactive providers' packages commented out. `load` finds an inactive provider's spec, which
    the plan does not hold because inactive providers are never loaded by the resolver."""
    return _render(
        "requirements.txt.j2",
        name=plan.config.name,
        server=server,
        packages=_active_packages(plan.providers),
        inactive=[_inactive_packages(provider, load) for provider in plan.inactive],
    )


def render_containerfile(plan: StackPlan, wheels: bool = False) -> str:
    """A Containerfile that builds wheels of requirements.txt in a stage with a compiler, installs
    them on a slim image and runs run.yaml, state on a /data volume. `wheels`: the output holds a
    `wheels/` directory (the server's own wheel) that the requirements name."""
    host = plan.config.server.host
    rebind = _is_loopback(host)
    command = ["stack", "run", "/app/run.yaml", *(["--host", "0.0.0.0"] if rebind else [])]
    server = plan.config.server
    scheme = "https" if server.tls_certfile else "http"
    # A certificate for the service's name does not name 127.0.0.1: the check trusts this one hop.
    context = ", context=__import__('ssl')._create_unverified_context()" if server.tls_certfile else ""
    health = ["python", "-c", f"import urllib.request; urllib.request.urlopen('{scheme}://127.0.0.1:{server.port}/v1/health', "
                              f"timeout=2{context})"]
    return _render("Containerfile.j2", name=plan.config.name, port=server.port, host=host, rebind=rebind, command=command,
                   health=health, wheels=wheels)


def render_launch_script(plan: StackPlan, venv: Path | None) -> str:
    """launch.sh: runs the run.yaml beside it, with `venv` (an absolute path) first on PATH if given."""
    return _render("launch.sh.j2", name=plan.config.name, venv=str(venv) if venv is not None else None)


def create_venv(path: Path) -> int:
    """Create a virtual environment (with pip) at `path` using this interpreter; returns the exit status."""
    print(f"creating virtual environment at {path}", flush=True)
    return _stream([sys.executable, "-m", "venv", str(path)])


def install_requirements(python: Path, requirements: Path) -> int:
    """`python -m pip install -r requirements` from the requirements' directory (the server's wheel
    is named relative to it), output streamed to stdout; returns pip's exit status."""
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-r", requirements.name]
    return _stream(command, cwd=requirements.parent)


@dataclass(frozen=True)
class _Package:
    requirement: str
    needed_by: list[str]


@dataclass(frozen=True)
class _InactivePackages:
    label: str
    missing_env: tuple[str, ...]
    packages: list[str] | None
    """None when the provider type cannot be loaded here, so its packages are unknown."""


def _active_packages(providers: Sequence[PlannedProvider]) -> list[_Package]:
    needed_by: dict[str, list[str]] = {}
    for provider in providers:
        label = _label(provider.api, provider.provider_id, provider.spec.name)
        wanted = [*_requirements(provider.api, provider.spec), *_config_packages(provider)]
        for requirement in dict.fromkeys(wanted):
            needed_by.setdefault(requirement, []).append(label)
    return [_Package(r, needed_by[r]) for r in sorted(needed_by, key=lambda r: (r.lower(), r))]


def _config_packages(provider: PlannedProvider) -> list[str]:
    if provider.spec.config_packages is None or provider.deferred_env:  # a config not validated here is not read either
        return []
    return [package.strip() for package in provider.spec.config_packages(provider.config) if package.strip()]


def _inactive_packages(provider: InactiveProvider, load: SpecLoader) -> _InactivePackages:
    label = _label(provider.api, provider.provider_id, provider.provider_type)
    try:
        spec = load(provider.api, provider.provider_type)
    except PluginLoadError:
        return _InactivePackages(label, provider.missing_env, None)
    packages = sorted(set(_requirements(provider.api, spec)), key=lambda r: (r.lower(), r))
    return _InactivePackages(label, provider.missing_env, packages)


def _requirements(api: Api, spec: ProviderSpec) -> list[str]:
    """The spec's own packages, plus the plugin package that provides it (unless it is stack)."""
    requirements = [r.strip() for r in spec.pip_packages if r.strip()]
    plugin = provider_distribution(api, spec.name)
    if plugin is not None and not plugin.startswith("stack=="):
        requirements.append(plugin)
    return requirements


def _label(api: Api, provider_id: str, provider_type: str) -> str:
    # json.dumps keeps a stray newline in a provider type from breaking out of a comment line.
    return f"{api.value} provider {provider_id} (type {json.dumps(provider_type)})"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _prepare_output(output: Path, source: Path) -> None:
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output}: exists and is not a directory (choose another --output)")
    # Rendering into the source's own directory would prepend a header to the user's run.yaml.
    if (output / "run.yaml").resolve() == source.resolve():
        raise ConfigError(f"{output}: is the directory of the source run.yaml, which would be overwritten (choose another --output)")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{output}: cannot create the output directory: {error.strerror}") from None


def _write(path: Path, text: str) -> Path:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot write: {error.strerror}") from None
    return path


def _build_venv(venv: Path, requirements: Path) -> int:
    status = create_venv(venv)
    if status != 0:
        print(f"error: creating the virtual environment {venv} failed (exit status {status})", file=sys.stderr)
        return status
    count = sum(1 for line in requirements.read_text(encoding="utf-8").splitlines() if line.strip() and not line.lstrip().startswith("#"))
    print(f"installing {count} requirements into {venv}", flush=True)
    status = install_requirements(_venv_python(venv), requirements)
    if status != 0:
        print(f"error: pip install into {venv} failed (exit status {status})", file=sys.stderr)
        return status
    print("done")
    return 0


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _stream(command: list[str], cwd: Path | None = None) -> int:
    """Run `command`, echoing its combined output line by line through print (so it interleaves
    with our own progress lines and is captured wherever stdout is)."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", cwd=cwd)
    except OSError as error:
        print(f"{command[0]}: {error.strerror}", flush=True)
        return 127
    assert process.stdout is not None
    with process:
        for line in process.stdout:
            print(line, end="", flush=True)
    return process.returncode


def _render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["quoted"] = lambda value: json.dumps(value, ensure_ascii=False)
    environment.filters["shell_quote"] = shlex.quote
    return environment
