"""What `import` and `local --model-repository` read of a model repository: sizes first, and no file's
bytes beyond what a ConfigMap holds (a weights file of a GiB costs no GiB of memory), and nothing a link
takes out of the repository (a `labels.txt -> /etc/passwd` never goes into a ConfigMap)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.support.cli import run
from tests.support.repository import ADD_SUB_CODE, ADD_SUB_CONFIG, LABELS, LABELS_CODE, LABELS_CONFIG
from triton_operator.repository import repository_as_source
from triton_operator.sources import Sources

GIB = 1 << 30
# What the process may reach reading a repository with a GiB file: the interpreter, the package, protobuf.
PEAK_RSS_LIMIT_BYTES = 300 << 20

# Runs the command line, then local mode's reading, in a fresh process, and prints its peak RSS last: VmHWM,
# this program's own (ru_maxrss keeps the peak of what the process was before its exec: pytest's, as large as
# 391 MiB late in a full run).
PEAK_RSS_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from triton_operator.cli import main
    from triton_operator.repository import repository_as_source
    from triton_operator.sources import Sources

    code = main(["import", sys.argv[1]])
    read = repository_as_source(Path(sys.argv[1]), Sources(), None)
    assert [path for path, _ in read.documents][-1].endswith("add_sub"), read
    peak = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    print(code, int(peak.split()[1]) * 1024, file=sys.stderr)
    """
)


def _model(folder: Path, config: str, files: dict[str, str]) -> Path:
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    for path, content in files.items():
        (folder / path).write_text(content)
    return folder


def test_a_weights_file_of_a_gib_is_sized_not_read(tmp_path: Path) -> None:
    model = _model(tmp_path / "models" / "add_sub", ADD_SUB_CONFIG, {"1/model.py": ADD_SUB_CODE})
    with (model / "1" / "weights.bin").open("wb") as weights:
        weights.truncate(GIB)  # sparse: no disk and no memory to make
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_SCRIPT, str(tmp_path / "models")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
        timeout=300,
    )
    *err, last = done.stderr.splitlines()
    code, peak = map(int, last.split())
    assert (done.returncode, code) == (0, 0), done.stderr
    assert peak < PEAK_RSS_LIMIT_BYTES, f"peak RSS {peak >> 20} MiB reading a repository with a 1 GiB file"
    assert any("its files come to 1024.0 MiB, more than a ConfigMap holds" in line for line in err), err
    [document] = [d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "TritonModel"]
    assert "files" not in document["spec"]


def test_a_link_out_of_the_repository_is_skipped_with_a_warning_naming_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (outside / "folder" / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
    repository = tmp_path / "models"
    labels = _model(repository / "labels", LABELS_CONFIG, {"1/model.py": LABELS_CODE, "labels.txt": LABELS})
    (labels / "1" / "labels.txt").symlink_to(outside / "passwd")
    (labels / "1" / "data").symlink_to(outside / "folder")
    (labels / "1" / "same.txt").symlink_to(labels / "labels.txt")  # a link inside the repository is its file
    (repository / "elsewhere").symlink_to(outside)

    code, out, err = run("import", str(repository))
    assert code == 0, err
    assert "root:x:0:0" not in out
    for link in (labels / "1" / "labels.txt", labels / "1" / "data", repository / "elsewhere"):
        assert f"warning: {link}: a link out of the repository" in err, err
    [config_map] = [d for d in yaml.safe_load_all(out) if d["kind"] == "ConfigMap"]
    assert config_map["data"] == {"model.py": LABELS_CODE, "labels.txt": LABELS, "same.txt": LABELS}

    found = repository_as_source(repository, Sources(), None).findings
    assert sorted(finding.file for finding in found if "a link out of the repository" in finding.message) == sorted(
        str(link) for link in (labels / "1" / "labels.txt", labels / "1" / "data", repository / "elsewhere")
    )


def test_a_model_folder_named_alone_is_the_repository_its_links_stay_in(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    labels = _model(tmp_path / "labels", LABELS_CONFIG, {"1/model.py": LABELS_CODE})
    (labels / "1" / "labels.txt").symlink_to(outside)
    code, out, err = run("import", str(labels))
    assert code == 0, err
    assert "root:x:0:0" not in out and f"warning: {labels / '1' / 'labels.txt'}: a link out of the repository" in err


def test_the_import_of_a_repository_is_unchanged_where_no_link_leads_out(tmp_path: Path) -> None:
    """The bytes of every file, as before: nothing is cut short by reading in steps."""
    labels = _model(tmp_path / "labels", LABELS_CONFIG, {"1/model.py": LABELS_CODE, "1/labels.txt": LABELS})
    (labels / "1" / "table.bin").write_bytes(bytes(range(256)) * 1000)
    code, out, err = run("import", str(labels))
    assert (code, err) == (0, ""), err
    [config_map] = [d for d in yaml.safe_load_all(out) if d["kind"] == "ConfigMap"]
    assert config_map["data"] == {"model.py": LABELS_CODE, "labels.txt": LABELS}
    assert base64.b64decode(config_map["binaryData"]["table.bin"]) == bytes(range(256)) * 1000
