"""A Jupyter server extension: Jupyter's token stays with Jupyter, never forwarded to a proxied server.

Loaded by /etc/jupyter/jupyter_server_config.py. jupyter-server-proxy forwards a request's whole query to
the server behind it (VS Code's code-server, TensorBoard): a first visit of /vscode/?token=... handed
Jupyter's login to code-server, which recorded it in ~/.cache/code-server/coder.json on the user's volume
and kept it in the address it redirects to. The proxied servers need no login of their own (Jupyter's was
checked before the proxy runs), so the `token` parameter is dropped from what they receive.
"""
from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit


def without_token(uri: str) -> str:
    """URI with every `token` query parameter removed, everything else as it was, byte for byte."""
    parts = urlsplit(uri)
    kept = [item for item in parts.query.split("&") if item and unquote(item.split("=", 1)[0]) != "token"]
    return urlunsplit(parts._replace(query="&".join(kept)))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    try:
        from jupyter_server_proxy.handlers import ProxyHandler
    except ImportError:  # no proxy, nothing to forward
        return
    forwarded_uri = ProxyHandler.get_client_uri

    def get_client_uri(self, protocol, host, port, proxied_path):
        return without_token(forwarded_uri(self, protocol, host, port, proxied_path))

    ProxyHandler.get_client_uri = get_client_uri
