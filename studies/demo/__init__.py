"""Demo data written for this project (not taken from any released dataset): 20 yes/no
questions with gold rationales, and rationales from two invented sources, demo-model-a (three
wrong predictions) and demo-model-b (six), and demonstrations of generalization questions for the
real-model demo. ``manage.py load_demo`` loads the first two, ``manage.py demo_lm`` uses the last."""
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
QUESTIONS_FILE = DEMO_DIR / "demo_questions_test.json"
RATIONALES_FILE = DEMO_DIR / "demo_rationales.jsonl"
LM_QUESTIONS_FILE = DEMO_DIR / "demo_lm_questions.json"  # generalization question demonstrations
DATASET_NAME = "Demo yes/no questions"
STUDY_NAME = "Demo utility study"
SOURCES = ["demo-model-a", "demo-model-b"]
