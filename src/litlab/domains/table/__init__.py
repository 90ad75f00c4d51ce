"""Tables: a CSV whose last column is the target (scikit-learn's diabetes table by
default), regression by an MLP that keeps the units of its features and target."""
