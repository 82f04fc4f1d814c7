"""Notebook 01's checks: where a logical position lives in the block pool, and the stretch sweep.

check        check_physical_slot, and check_utilization_sweep (the stretch, not graded)
scenarios    the chapter's example, the seeded scrambled tables, the bad arguments, the sweep's requests
slot_calls   one call of physical_slot: the slot it must return, or the ValueError it must raise
sweep_calls  one call of utilization_sweep, compared block size by block size
diagnosis    the hints that name the bug from the shape of a wrong answer or a wrong refusal
"""
