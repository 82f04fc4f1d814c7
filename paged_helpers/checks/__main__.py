"""python -m paged_helpers.checks: the table of the course's checks."""

from . import table

print(table())
