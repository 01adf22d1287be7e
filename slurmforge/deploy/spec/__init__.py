"""The cluster file: its schema (model.py and the parts it is made of), and how it is read."""
