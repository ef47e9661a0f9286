"""DVC push/pull through dvc-s3 against a real S3-compatible server (moto) on loopback.
Credentials go to .dvc/config.local, never to the tracked .dvc/config."""

import shutil
import subprocess

import pytest

moto_server = pytest.importorskip("moto.server")


def sh(root, *cmd):
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture
def s3():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    import boto3

    boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="k", aws_secret_access_key="s",
                 region_name="us-east-1").create_bucket(Bucket="clap-remote")
    yield f"http://{host}:{port}"
    server.stop()


def test_push_pull_through_s3(s3, tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "git", "init", "-q")
    sh(root, "dvc", "init", "-q")
    sh(root, "dvc", "remote", "add", "-d", "s3", "s3://clap-remote/cache")
    sh(root, "dvc", "remote", "modify", "s3", "endpointurl", s3)
    sh(root, "dvc", "remote", "modify", "--local", "s3", "access_key_id", "k")
    sh(root, "dvc", "remote", "modify", "--local", "s3", "secret_access_key", "s")
    (root / "models").mkdir()
    payload = bytes(range(256)) * 512
    (root / "models" / "adapter_model.safetensors").write_bytes(payload)
    sh(root, "dvc", "add", "-q", "models")
    sh(root, "dvc", "push", "-q")
    assert "secret" not in (root / ".dvc" / "config").read_text()
    assert "secret_access_key" in (root / ".dvc" / "config.local").read_text()
    shutil.rmtree(root / "models")
    shutil.rmtree(root / ".dvc" / "cache")
    sh(root, "dvc", "pull", "-q")
    assert (root / "models" / "adapter_model.safetensors").read_bytes() == payload
