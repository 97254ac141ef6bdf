"""Keep the Redis token records in step with MySQL: a revoked token or a
deactivated user stops working at once, in every web process."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from rest_framework.authtoken.models import Token

from accounts import token_cache
from accounts.authentication import user_blob


@receiver(post_save, sender=Token)
def _token_saved(sender, instance: Token, **_kwargs) -> None:
    blob = user_blob(instance.user)
    transaction.on_commit(lambda: token_cache.token_store(token=instance.key, user_blob=blob))


def _revoke(key: str) -> None:
    # Refused at once (a token being deleted must not buy), forgotten when the
    # deletion commits (a short tombstone stays, so that no fill which read the
    # row before the commit brings it back); a deletion that rolls back locks
    # nobody out for long.
    token_cache.token_revoking(token=key)
    transaction.on_commit(lambda: token_cache.token_forget(token=key))


@receiver(post_delete, sender=Token)
def _token_deleted(sender, instance: Token, **_kwargs) -> None:
    _revoke(instance.key)


@receiver(post_save, sender=get_user_model())
def _user_saved(sender, instance, created: bool, **_kwargs) -> None:
    if created:
        return
    blob = user_blob(instance)
    keys = list(Token.objects.filter(user_id=instance.pk).values_list("key", flat=True))

    def push() -> None:
        for key in keys:
            token_cache.token_store(token=key, user_blob=blob)

    transaction.on_commit(push)


@receiver(post_delete, sender=get_user_model())
def _user_deleted(sender, instance, **_kwargs) -> None:
    for key in Token.objects.filter(user_id=instance.pk).values_list("key", flat=True):
        _revoke(key)
