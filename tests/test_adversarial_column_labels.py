"""Found by adversarial review: MariaDB/MySQL label an unaliased expression with its
SQL text, TRUNCATED (about 256 bytes). A token the model writes in a string
literal is re-identified into that text, so the `columns` of the result
carry the original; known values only replace WHOLE originals, so a label
cut inside the literal leaks a prefix of the original in clear.

Class: RE-IDENTIFICATION / COLUMN NAMES (chat/executor.py:_run_sql builds
"columns" with mask_any(result.columns, known=...) only; lineage taint of
substituted originals covers cell values, never labels;
governance/pii/known_values.py matches whole values only).
Before the fix a label ended in "'김민" for the token of "김민준".
"""

from __future__ import annotations

import json

import pytest

from tests.support.governed import governed_connection

pytestmark = [pytest.mark.django_db, pytest.mark.services]

NAME = "김민준"


def test_truncated_label_leaks_a_prefix_of_a_reidentified_name(mysql_customer_db, django_user_model):
    # Class: RE-IDENTIFICATION / COLUMN NAMES (label truncation).
    governed = governed_connection(mysql_customer_db, django_user_model)
    token = governed.tokenise("name", NAME)
    labels = []
    # Slide the literal across the server's label limit; one width cuts it
    # right after the second syllable.
    for pad in range(225, 260):
        payload, outcome = governed.run(f"SELECT concat('{'a' * pad}', '{token}') FROM customers WHERE id = 1")
        assert outcome == "success", payload
        labels.extend(payload["columns"])
    leaked = [label for label in labels if label.endswith("'" + NAME[:2])]
    assert not leaked, json.dumps(leaked[:1], ensure_ascii=False)
