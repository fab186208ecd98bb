"""What a placement user sees: :mod:`.cli` (``packplace place``, ``validate``, ``calibrate``),
:mod:`.gantt` (the plan as a Gantt chart) and :mod:`.balance_report` (the data-parallel balance of a plan).
"""
