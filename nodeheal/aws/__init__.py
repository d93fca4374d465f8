"""AWS side of NodeHeal: EC2 instance resolution, terminate/reboot, ownership checks, notifications."""
