"""lockd chaos: fault injection against real lockd processes and a checker
for the histories they produce. Python 3 standard library only."""
