# The NGC stand-in's competing Jupyter config (NGC keeps one of its own in /usr/local/etc/jupyter).
# Hostile on purpose: a server that took these settings would let anyone in and serve the whole
# filesystem. The image built on this base must keep its own authentication, address and root folder.
c = get_config()  # noqa: F821 (injected by Jupyter's config loader)
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.token = ""
c.IdentityProvider.token = ""
c.ServerApp.password = ""
c.ServerApp.root_dir = "/"
c.ServerApp.allow_root = True
