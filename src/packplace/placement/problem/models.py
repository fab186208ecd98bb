"""Model shapes of the placement problem: the shared :class:`packplace.shape.TransformerShape`.

A role's shape is a language model (``lm_head`` true: actor, reference) or has a scalar value head
(critic, reward). ``ModelSpec`` is the name the placement modules use for it.
"""

from __future__ import annotations

from packplace.shape import TransformerShape

#: Roles whose output is the vocabulary (language-model head); the others have a scalar value head.
LM_ROLES = ("actor", "reference")

#: The placement problem's model shape (one class for both problems).
ModelSpec = TransformerShape
