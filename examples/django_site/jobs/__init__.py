"""The recipe's one app: submit a job, see its status."""
