"""The optimizer: proposers (reflection, demonstration, merge, ablation), the leakage check, the
screen's record, the sequential gate, the Pareto pool, consolidation and the learning-rate schedule.

Import from the submodules (`skillopt.optimizer.sequential_test`, ...): this package imports nothing at import
time, so the run store can hold the optimizer's plain records without importing the model layer.
"""
