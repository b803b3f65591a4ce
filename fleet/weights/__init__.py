"""A model declared by Hugging Face repository and commit: fetched, checked, found again."""
