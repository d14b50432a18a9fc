"""The adjoint rigs (oscillator, pendulum, crane-adjoint): designed inputs, sequential design."""
