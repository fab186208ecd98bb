"""The step model checked against measurements.

:mod:`.validate` (predicted against published step and phase times), :mod:`.calibrate` (the hardware
efficiency knobs fitted to measured task times) and :mod:`.crossval` (those fits reported out of sample).
"""
