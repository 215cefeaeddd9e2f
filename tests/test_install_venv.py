"""The venv installer hands uv exactly pip's settings, and sends the install to pip when it cannot."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
import install_venv  # noqa: E402  (run by path before anything is installed, so not a package import)


def test_each_pip_setting_that_changes_what_is_installed_reaches_uv():
    options, env = install_venv.uv_options({
        "find-links": "/opt/wheels /srv/more",
        "extra-index-url": "file:///a/simple  file:///b/simple",
        "index-url": "https://mirror.example/simple",
        "constraint": "/etc/pins.txt",
        "no-index": "false",
        "cert": "/etc/ca.pem",
        "default-timeout": "180",
        "disable-pip-version-check": "1",
    })
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert ("--find-links", "/opt/wheels") in pairs and ("--find-links", "/srv/more") in pairs
    assert ("--extra-index-url", "file:///a/simple") in pairs and ("--extra-index-url", "file:///b/simple") in pairs
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--constraint", "/etc/pins.txt") in pairs
    assert "--no-index" not in options and len(options) == 12
    assert env == {"SSL_CERT_FILE": "/etc/ca.pem"}
    assert install_venv.uv_options({"no-index": "true"}) == (["--no-index"], {})


def test_a_setting_uv_cannot_take_sends_the_install_to_pip():
    reason = install_venv.uv_options({"find-links": "/opt/wheels", "trusted-host": "mirror.example"})
    assert reason == "pip setting 'trusted-host' has no uv equivalent here"


def test_the_environment_overrides_pip_config_files(tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /from/the/file\nextra-index-url = file:///x/simple\n"
                      "[install]\nconstraint = /from/install\n[download]\nno-index = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=str(config), PIP_FIND_LINKS="/from/the/environment")
    code = ("import install_venv, json, sys; print(json.dumps(install_venv.pip_settings(sys.executable)))")
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(ROOT / "autograder")},
                         capture_output=True, text=True, check=True).stdout
    settings = json.loads(out)
    assert settings["find-links"] == "/from/the/environment"
    assert settings["extra-index-url"] == "file:///x/simple"
    assert settings["constraint"] == "/from/install"
    assert "no-index" not in settings  # the download command's, not install's
