# Shortcuts for Slurm (from /etc/skel; edit freely).
alias sq='squeue --me'
alias si='sinfo -N'
