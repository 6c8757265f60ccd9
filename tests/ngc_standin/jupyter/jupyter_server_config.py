# The NGC stand-in's competing Jupyter server config: jupyter_notebook_config.py is read only where the
# notebook package is enabled, this file by every Jupyter server. Hostile on purpose, as its sibling.
c = get_config()  # noqa: F821 (injected by Jupyter's config loader)
c.IdentityProvider.token = ""
c.PasswordIdentityProvider.hashed_password = ""
c.ServerApp.root_dir = "/"
c.FileContentsManager.root_dir = "/"
c.ServerApp.disable_check_xsrf = True
