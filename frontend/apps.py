from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Browser UI"

    def ready(self):
        # Websockets close when what opened them ends (frontend/ws_sessions.py).
        from django.contrib.auth.signals import user_logged_out
        from django.contrib.sessions.models import Session
        from django.db.models.signals import post_delete, post_save

        from accounts.models import ApiToken
        from frontend import ws_sessions

        user_logged_out.connect(ws_sessions.on_user_logged_out, dispatch_uid="ws-session-logout")
        post_delete.connect(ws_sessions.on_session_deleted, sender=Session, dispatch_uid="ws-session-deleted")
        post_save.connect(ws_sessions.on_token_saved, sender=ApiToken, dispatch_uid="ws-token-saved")
        post_delete.connect(ws_sessions.on_token_deleted, sender=ApiToken, dispatch_uid="ws-token-deleted")
