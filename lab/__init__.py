"""Small shared toolkit below the three apps (``studies`` <- ``annotations`` <- ``scoring``).

It knows no app: status machines (``lab.transitions``) and what more than one app needs the same
way. Apps may import it; it imports no app."""
