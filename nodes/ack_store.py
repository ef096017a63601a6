"""Writing batches of Node acks to the Node rows: one thread hop, one UPDATE per revision."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.db import transaction

from nodes.ack_log import RevisionAcks
from nodes.models import Node


async def write_acks(batch: list[RevisionAcks]) -> None:
    await database_sync_to_async(_write)(batch)


def _write(batch: list[RevisionAcks]) -> None:
    with transaction.atomic():
        for acks in batch:
            Node.objects.filter(node_id__in=acks.node_ids).update(
                last_acked_revision=acks.revision, last_acked_at=acks.acked_at
            )
