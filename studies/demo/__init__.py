"""Demo data written for this project (not taken from any released dataset): 20 yes/no
questions with gold rationales, and rationales from two invented sources, demo-model-a (three
wrong predictions) and demo-model-b (six). ``manage.py load_demo`` loads them."""
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
QUESTIONS_FILE = DEMO_DIR / "demo_questions_test.json"
RATIONALES_FILE = DEMO_DIR / "demo_rationales.jsonl"
DATASET_NAME = "Demo yes/no questions"
STUDY_NAME = "Demo utility study"
SOURCES = ["demo-model-a", "demo-model-b"]
