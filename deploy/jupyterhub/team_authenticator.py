"""NativeAuthenticator (sign-up, an admin authorizes, password login) as this hub runs it.

What it changes, and why:
- The admins' accounts exist from the start, authorized: the first admin's password comes from
  HUB_ADMIN_PASSWORD_FILE, every other admin's is a random one nobody knows until the first admin sets it
  at /hub/change-password/NAME. So nobody can claim an admin's name by signing up before the admin does.
- A sign-up is refused, with one line, when the name is not a user name here (hub_settings.USERNAME),
  is an admin's name in any case, or the password is short or among the most common ones.
- Authorizing and discarding an account take a POST carrying the XSRF token (JupyterHub checks it on
  every POST), never a GET: a link on another site cannot approve anyone.
- A compatibility layer for nativeauthenticator 1.3.0 under JupyterHub 6 (the Workarounds section of
  deploy/jupyterhub/README.md; tests/team/test_hub_workarounds.py says when it can go).
"""
from __future__ import annotations

import secrets

import bcrypt
from nativeauthenticator import NativeAuthenticator
from nativeauthenticator import handlers as native
from nativeauthenticator.orm import UserInfo
from tornado.escape import url_escape
from tornado.httputil import url_concat
from traitlets import Unicode

from hub_settings import USERNAME_RULE, is_username, read_password


class NoStatsd:
    """Workaround: nativeauthenticator 1.3.0 times its login with `self.statsd.timer(...)`, and JupyterHub 6
    handlers have no statsd any more (every login was a 500). This timer measures nothing."""

    def timer(self, name: str) -> NoStatsd:
        return self

    def start(self) -> NoStatsd:
        return self

    def stop(self, send: bool = True) -> None:
        pass


class LoginHandler(native.LoginHandler):
    statsd = NoStatsd()

    def _render(self, login_error=None, username=None, sync=False, **_error_page):
        """Workaround: JupyterHub 6 renders a failed login's error page through _render(sync=True, ...),
        which nativeauthenticator 1.3.0's _render does not take. This one does, with native's page."""
        return self.render_template(
            "native-login.html", sync=sync,
            next=url_escape(self.get_argument("next", default="")),
            username=username, login_error=login_error,
            custom_html=self.authenticator.custom_html, login_url=self.settings["login_url"],
            enable_signup=self.authenticator.enable_signup, two_factor_auth=self.authenticator.allow_2fa,
            authenticator_login_url=url_concat(self.authenticator.login_url(self.hub.base_url),
                                               {"next": self.get_argument("next", "")}),
        )


class SignUpHandler(native.SignUpHandler):
    async def post(self):
        refusal = self.authenticator.sign_up_refusal(self.get_body_argument("username", ""),
                                                     self.get_body_argument("signup_password", ""))
        if refusal is None:
            return await super().post()
        self.log.warning("sign-up refused: %s", refusal)
        self.set_status(400)
        self.finish(await self.render_template(
            "signup.html", result_message=refusal, alert="alert-danger",
            ask_email=self.authenticator.ask_email_on_signup, two_factor_auth=self.authenticator.allow_2fa,
            recaptcha_key=self.authenticator.recaptcha_key, tos=self.authenticator.tos))


# The same actions as nativeauthenticator's, taken on POST only: a handler without `get` answers 405.
class ToggleAuthorizationHandler(native.LocalBase):
    post = native.ToggleAuthorizationHandler.get


class DiscardHandler(native.LocalBase):
    post = native.DiscardHandler.get


class TeamAuthenticator(NativeAuthenticator):
    first_admin = Unicode(config=True, help="The admin whose password HUB_ADMIN_PASSWORD_FILE holds.")
    admin_password_file = Unicode(config=True, help="A file holding the first admin's password.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.create_admin_accounts()

    def create_admin_accounts(self) -> None:
        """Each admin in admin_users gets an authorized account, unless they have one."""
        for name in sorted(self.admin_users):
            if self.get_user(name) is not None:
                continue
            if name == self.first_admin:
                password = read_password(self.admin_password_file)
                if self.is_password_common(password):
                    raise SystemExit("HUB_ADMIN_PASSWORD_FILE holds one of the most common passwords; "
                                     "write another into it")
                how = "password from HUB_ADMIN_PASSWORD_FILE"
            else:
                password = secrets.token_urlsafe(32)
                how = f"no password yet: {self.first_admin} sets one at /hub/change-password/{name}"
            self.db.add(UserInfo(username=name, password=bcrypt.hashpw(password.encode(), bcrypt.gensalt()),
                                 is_authorized=True))
            self.db.commit()
            self.log.info("admin account %s created (%s)", name, how)

    def sign_up_refusal(self, username: str, password: str) -> str | None:
        """Why a sign-up as USERNAME with PASSWORD is refused, in one line; None when it may go ahead."""
        name = self.normalize_username(username)
        if not is_username(name):
            return f"{username!r} cannot be a user name here: use {USERNAME_RULE}."
        if name in self.admin_users:
            return f"{username!r} is an admin's name; sign up under a name of your own."
        if len(password) < self.minimum_password_length:
            return f"The password needs at least {self.minimum_password_length} characters."
        if self.is_password_common(password):
            return "That password is one of the most common ones; choose another."
        return None

    def validate_username(self, username: str) -> bool:
        """The one pattern of hub_settings.USERNAME, at sign-up, login and when an admin adds a user."""
        return is_username(username) and super().validate_username(username)

    def get_handlers(self, app):
        ours = {"/login": LoginHandler, "/signup": SignUpHandler, "/authorize/([^/]*)": ToggleAuthorizationHandler,
                "/discard/([^/]*)": DiscardHandler}
        return [(route, ours.get(route, handler)) for route, handler in super().get_handlers(app)]

